package main

// allotctl override set|get|list|delete: the Admin calls, their flags and
// what they print.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
)

// overrideFlags are the flags of the override commands; each uses some.
type overrideFlags struct {
	rule, key, note, expires string
	limit, burst             int64
	ttl                      time.Duration
	pageSize                 uint
}

func override(ctx context.Context, admin allotv1.AdminClient, g *globals, cmd string, args []string, out io.Writer) error {
	f := &overrideFlags{}
	fs := flag.NewFlagSet("override "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.rule, "rule", "", "the rule")
	fs.StringVar(&f.key, "key", "", "the key")
	switch cmd {
	case "set":
		fs.Int64Var(&f.limit, "limit", 0, "tokens per the rule's period")
		fs.Int64Var(&f.burst, "burst", 0, "capacity, token_bucket rules only; default: the rule's, scaled")
		fs.DurationVar(&f.ttl, "ttl", 0, "how long the override applies; default: until deleted")
		fs.StringVar(&f.expires, "expires", "", "when the override stops applying, RFC 3339")
		fs.StringVar(&f.note, "note", "", "why: kept and logged with the change")
	case "list":
		fs.UintVar(&f.pageSize, "page-size", 0, "overrides a call, at most 1000; every page is printed")
	case "get", "delete":
	default:
		return fmt.Errorf("unknown command override %q (want set, get, list or delete)", cmd)
	}
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("override %s: %w", cmd, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("override %s: unexpected argument %q (the rule and key are --rule and --key)", cmd, fs.Arg(0))
	}
	switch cmd {
	case "set":
		req := &allotv1.SetOverrideRequest{Rule: f.rule, Key: f.key, Limit: f.limit, Burst: f.burst, Note: f.note}
		if f.ttl != 0 {
			req.Ttl = durationpb.New(f.ttl)
		}
		if f.expires != "" {
			t, err := time.Parse(time.RFC3339, f.expires)
			if err != nil {
				return fmt.Errorf("--expires: want an RFC 3339 time such as 2027-01-01T00:00:00Z: %v", err)
			}
			req.ExpiresAt = timestamppb.New(t)
		}
		resp, err := admin.SetOverride(ctx, req)
		if err != nil {
			return err
		}
		return show(out, g, resp, func(w io.Writer) {
			fmt.Fprintf(w, "set %s\n", describe(resp.Override))
			fmt.Fprintf(w, "rules version %s\n", resp.RulesVersion)
		})
	case "get":
		resp, err := admin.GetOverride(ctx, &allotv1.GetOverrideRequest{Rule: f.rule, Key: f.key})
		if err != nil {
			return err
		}
		return show(out, g, resp, func(w io.Writer) {
			fmt.Fprintf(w, "%s\n", describe(resp.Override))
			e := resp.Effective
			fmt.Fprintf(w, "effective: limit %d per %v, burst %d, from the %s\n", e.Limit, e.Period.AsDuration(), e.Burst, e.Source)
		})
	case "delete":
		resp, err := admin.DeleteOverride(ctx, &allotv1.DeleteOverrideRequest{Rule: f.rule, Key: f.key})
		if err != nil {
			return err
		}
		return show(out, g, resp, func(w io.Writer) {
			fmt.Fprintf(w, "deleted %s\n", describe(resp.Override))
			fmt.Fprintf(w, "rules version %s\n", resp.RulesVersion)
		})
	}
	return list(ctx, admin, g, f, out)
}

// list prints every page of a rule's overrides.
func list(ctx context.Context, admin allotv1.AdminClient, g *globals, f *overrideFlags, out io.Writer) error {
	all := &allotv1.ListOverridesResponse{}
	req := &allotv1.ListOverridesRequest{Rule: f.rule, PageSize: uint32(min(f.pageSize, 1<<31))}
	for {
		resp, err := admin.ListOverrides(ctx, req)
		if err != nil {
			return err
		}
		all.Overrides = append(all.Overrides, resp.Overrides...)
		if resp.NextPageToken == "" {
			break
		}
		req.PageToken = resp.NextPageToken
	}
	return show(out, g, all, func(w io.Writer) {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "KEY\tLIMIT\tBURST\tEXPIRES\tSET BY\tNOTE")
		for _, o := range all.Overrides {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", o.Key, o.Limit, o.Burst, expires(o), o.SetBy, o.Note)
		}
		tw.Flush()
	})
}

// show writes m as JSON with --json, else as text says.
func show(out io.Writer, g *globals, m proto.Message, text func(io.Writer)) error {
	if !g.json {
		text(out)
		return nil
	}
	b, err := protojson.MarshalOptions{Multiline: true}.Marshal(m)
	if err != nil {
		return errors.New("encoding the answer: " + err.Error())
	}
	_, err = fmt.Fprintf(out, "%s\n", b)
	return err
}

func describe(o *allotv1.RuntimeOverride) string {
	s := fmt.Sprintf("%s/%s: limit %d, burst %d, expires %s, set by %s", o.Rule, o.Key, o.Limit, o.Burst, expires(o), o.SetBy)
	if o.SetAt != nil {
		s += " at " + o.SetAt.AsTime().UTC().Format(time.RFC3339)
	}
	if o.Note != "" {
		s += fmt.Sprintf(", note %q", o.Note)
	}
	return s
}

func expires(o *allotv1.RuntimeOverride) string {
	if o.ExpiresAt == nil {
		return "never"
	}
	return o.ExpiresAt.AsTime().UTC().Format(time.RFC3339)
}
