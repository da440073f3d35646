// Command allotctl calls an allocator's Admin service: it sets, reads,
// lists and deletes the per-key overrides that take effect at runtime,
// fleet-wide, without a rules file edit (docs/operations.md).
//
//	allotctl --addr alloc-1.internal:7070 --tls-ca ca.crt --token-file admin.token \
//	    override set --rule api-per-key --key tenant-42 --limit 10000 --ttl 24h --note "ticket 4711"
//
// Every flag may also be set by an environment variable: --addr by
// ALLOTCTL_ADDR, --token-file by ALLOTCTL_TOKEN_FILE, and so on; the token
// itself may come in ALLOTCTL_TOKEN, never on the command line, where
// other users of the host could read it.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	allotv1 "github.com/allot-dev/allot/api/allot/v1"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "allotctl:", err)
		os.Exit(1)
	}
}

// globals are the connection's flags.
type globals struct {
	addr                   string
	tokenFile              string
	tlsOn                  bool
	caFile, certFile, keyF string
	serverName             string
	timeout                time.Duration
	json                   bool
}

const usage = `Usage: allotctl [flags] override set|get|list|delete [command flags]

  override set    --rule R --key K --limit N [--burst N] [--ttl D | --expires RFC3339] [--note S]
  override get    --rule R --key K
  override list   --rule R [--page-size N]
  override delete --rule R --key K

Flags:
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	g := &globals{}
	fs := flag.NewFlagSet("allotctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&g.addr, "addr", "127.0.0.1:7070", "allocator gRPC address (ALLOTCTL_ADDR)")
	fs.StringVar(&g.tokenFile, "token-file", "", "file holding the admin token, its first line (ALLOTCTL_TOKEN_FILE); or set ALLOTCTL_TOKEN")
	fs.BoolVar(&g.tlsOn, "tls", false, "TLS, trusting the system's CAs (ALLOTCTL_TLS); implied by --tls-ca and --tls-cert")
	fs.StringVar(&g.caFile, "tls-ca", "", "PEM CA bundle the allocator's certificate must verify against (ALLOTCTL_TLS_CA)")
	fs.StringVar(&g.certFile, "tls-cert", "", "PEM client certificate, for mTLS (ALLOTCTL_TLS_CERT)")
	fs.StringVar(&g.keyF, "tls-key", "", "PEM key of --tls-cert (ALLOTCTL_TLS_KEY)")
	fs.StringVar(&g.serverName, "tls-server-name", "", "name to check the allocator's certificate against (ALLOTCTL_TLS_SERVER_NAME). Default: the host of --addr")
	fs.DurationVar(&g.timeout, "timeout", 5*time.Second, "deadline of the call (ALLOTCTL_TIMEOUT)")
	fs.BoolVar(&g.json, "json", false, "print the answer as JSON (ALLOTCTL_JSON)")
	err := envDefaults(fs)
	if err == nil {
		err = fs.Parse(args)
	}
	if errors.Is(err, flag.ErrHelp) || err == nil && fs.NArg() == 0 {
		fmt.Fprint(stderr, usage)
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		if err == nil {
			return errors.New("no command given")
		}
		return err
	}
	if err != nil {
		return fmt.Errorf("%w (see --help)", err)
	}
	rest := fs.Args()
	if rest[0] != "override" || len(rest) < 2 {
		return fmt.Errorf("unknown command %q (want override set|get|list|delete; see --help)", strings.Join(rest, " "))
	}
	conn, err := g.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	return override(ctx, allotv1.NewAdminClient(conn), g, rest[1], rest[2:], stdout)
}

// envDefaults applies ALLOTCTL_<FLAG> variables before the command line,
// so that flags win.
func envDefaults(fs *flag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := "ALLOTCTL_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok && err == nil {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("%s=%q: %v", name, v, e)
			}
		}
	})
	return err
}

// dial connects with the TLS and token the flags say. A token is never
// sent in plaintext.
func (g *globals) dial() (*grpc.ClientConn, error) {
	token, err := g.token()
	if err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if g.tlsOn || g.caFile != "" || g.certFile != "" {
		cfg, err := g.tlsConfig()
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(cfg)
	} else if token != "" {
		return nil, errors.New("a token needs TLS (--tls or --tls-ca): it must not cross the network in plaintext")
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(token)))
	}
	return grpc.NewClient(g.addr, opts...)
}

func (g *globals) token() (string, error) {
	if g.tokenFile == "" {
		return strings.TrimSpace(os.Getenv("ALLOTCTL_TOKEN")), nil
	}
	b, err := os.ReadFile(g.tokenFile)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	if line = strings.TrimSpace(line); line == "" {
		return "", fmt.Errorf("--token-file %s: its first line is empty", g.tokenFile)
	}
	return line, nil
}

func (g *globals) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{ServerName: g.serverName, MinVersion: tls.VersionTLS12}
	if g.caFile != "" {
		pem, err := os.ReadFile(g.caFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it", g.caFile)
		}
	}
	if (g.certFile == "") != (g.keyF == "") {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	if g.certFile != "" {
		pair, err := tls.LoadX509KeyPair(g.certFile, g.keyF)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert, --tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// bearer sends the admin token with each call, over TLS only.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return true }
