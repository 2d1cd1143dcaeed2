package config_test

import (
	"fmt"

	"github.com/dynalimit/dynalimit/internal/config"
)

func ExampleFromEnv() {
	env := map[string]string{
		"GRPC_PORT":       "9081",
		"BACKEND_TYPE":    "DynamoDB",
		"BACKEND_TIMEOUT": "12ms",
		"RUNTIME_ROOT":    "/srv/rl",
	}
	s, err := config.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := s.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(s.GRPCPort, s.BackendType, s.BackendTimeout, s.ConfigDir())

	_, err = config.FromEnv(func(k string) string {
		if k == "SHUTDOWN_DRAIN" {
			return "5"
		}
		return ""
	})
	fmt.Println(err)
	// Output:
	// 9081 dynamodb 12ms /srv/rl/config
	// config: SHUTDOWN_DRAIN="5": not a duration (e.g. 15ms, 10s, 1h)
}
