package client

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// transportOptions are the connection's credentials: TLS when Config.TLS is
// set, and the token on every call when Config.Token is.
func (c *Config) transportOptions() []grpc.DialOption {
	if c.TLS == nil {
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(c.TLS))}
	if c.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(tokenCredentials(c.Token)))
	}
	return opts
}

// checkSecurity refuses a token that would cross the network in plaintext
// or could not be sent as a header value.
func (c *Config) checkSecurity() error {
	if c.Token == "" {
		return nil
	}
	if c.TLS == nil {
		return errors.New("client: Config.Token needs Config.TLS: a token must not cross the network in plaintext")
	}
	for i := 0; i < len(c.Token); i++ {
		if b := c.Token[i]; b <= ' ' || b > '~' {
			return fmt.Errorf("client: Config.Token: byte %d (%#x) is not a visible ASCII character", i, b)
		}
	}
	return nil
}

// tokenCredentials sends the shared token with every call as
// "authorization: Bearer <token>".
type tokenCredentials string

func (t tokenCredentials) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

// RequireTransportSecurity makes grpc refuse to send the token over a
// connection without TLS; checkSecurity already refuses the configuration.
func (tokenCredentials) RequireTransportSecurity() bool { return true }

// SetGossipKeys replaces the gossip keys of a running node, for a rotation:
// keys[0] encrypts from now on and every key listed is accepted. Rotate in
// three rounds over the fleet: add the new key second, make it first, drop
// the old one.
func (c *Client) SetGossipKeys(keys [][]byte) error {
	if c.gossip == nil {
		return errors.New("client: SetGossipKeys: the node does not gossip (Config.Gossip is nil)")
	}
	if err := c.gossip.SetKeys(keys); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	return nil
}
