//go:build redisbench

package redisclient

import (
	"context"
	"fmt"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// client runs the decision script once and returns its answer.
type client interface {
	decide(ctx context.Context, c *call) ([]int64, error)
	close()
}

// clientNames are the clients measured, in the order of the first round.
var clientNames = []string{"rueidis", "goredis", "goredis-auto"}

// openClient opens the named client as a production store would.
func openClient(name, addr string) (client, error) {
	switch name {
	case "rueidis":
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			return nil, err
		}
		return &rueidisClient{c: c, lua: rueidis.NewLuaScript(decideScript)}, nil
	case "goredis":
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		return &goredisClient{c: c, s: c, script: goredis.NewScript(decideScript)}, nil
	case "goredis-auto":
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		ap, err := c.AutoPipeline()
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		return &goredisClient{c: c, s: ap, script: goredis.NewScript(decideScript)}, nil
	}
	return nil, fmt.Errorf("no client %q", name)
}

// rueidisClient is rueidis with its default automatic pipelining.
type rueidisClient struct {
	c   rueidis.Client
	lua *rueidis.Lua
}

func (r *rueidisClient) decide(ctx context.Context, c *call) ([]int64, error) {
	return r.lua.Exec(ctx, r.c, c.keys, c.args).AsIntSlice()
}

func (r *rueidisClient) close() { r.c.Close() }

// goredisClient is go-redis v9 through its pool (s is the client) or its
// blocking automatic pipeliner (s is Client.AutoPipeline()).
type goredisClient struct {
	c      *goredis.Client
	s      goredis.Scripter
	script *goredis.Script
}

func (g *goredisClient) decide(ctx context.Context, c *call) ([]int64, error) {
	return g.script.Run(ctx, g.s, c.keys, c.anys...).Int64Slice()
}

func (g *goredisClient) close() { _ = g.c.Close() }
