package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/config"
)

// errNoDynamo is returned until the DynamoDB store is part of the binary.
var errNoDynamo = errors.New("the DynamoDB store is not part of this build yet; use BACKEND_TYPE=memory")

func openDynamo(context.Context, config.Settings, prometheus.Registerer, *logrus.Entry) (backend, error) {
	return backend{}, errNoDynamo
}

func adminCommand(_ context.Context, cmd string, _ []string, _ func(string) string, _, stderr io.Writer) int {
	fmt.Fprintf(stderr, "ratelimit %s: %v\n", cmd, errNoDynamo)
	return 1
}
