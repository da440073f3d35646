// Command gubernator runs one Gubernator daemon for Allot's bench, with a
// fixed list of peers and Gubernator's default behaviour settings.
//
// It is a module of its own so that Gubernator and its dependencies never
// enter Allot's go.mod: the bench builds it (go build -C bench/gubernator),
// starts one process per daemon, and talks to them over gRPC with its own
// encoding of Gubernator's messages.
//
//	gubernator --listen 127.0.0.1:7081 --peers 127.0.0.1:7081,127.0.0.1:7082,127.0.0.1:7083
//
// It prints "gubernator ready on ADDR" once the daemon serves, and stops on
// SIGTERM, SIGINT, or when its standard input closes (the bench is gone).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gubernator-io/gubernator/v2"
	"github.com/sirupsen/logrus"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gubernator:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("gubernator", flag.ContinueOnError)
	listen := fs.String("listen", "", "gRPC address of this daemon, host:port (also what it advertises to its peers)")
	peers := fs.String("peers", "", "gRPC addresses of every daemon of the cluster, this one included, comma-separated")
	if err := fs.Parse(args); err != nil {
		return err
	}
	all := strings.Split(*peers, ",")
	if *listen == "" || !slices.Contains(all, *listen) {
		return errors.New("--listen is required and must be one of --peers")
	}

	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := gubernator.SpawnDaemon(ctx, gubernator.DaemonConfig{
		GRPCListenAddress: *listen,
		AdvertiseAddress:  *listen,
		HTTPListenAddress: "127.0.0.1:0", // the JSON gateway and metrics: not used by the bench
		PeerDiscoveryType: "none",        // the peers are the fixed list below
		InstanceID:        *listen,
		Logger:            log.WithField("daemon", *listen),
	})
	if err != nil {
		return err
	}
	defer d.Close()
	var infos []gubernator.PeerInfo
	for _, p := range all {
		infos = append(infos, gubernator.PeerInfo{GRPCAddress: p})
	}
	d.SetPeers(infos)
	fmt.Println("gubernator ready on", *listen)

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	gone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(gone)
	}()
	select {
	case <-stop:
	case <-gone:
	}
	return nil
}
