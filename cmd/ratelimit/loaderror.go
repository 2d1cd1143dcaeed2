package main

import (
	"errors"

	"github.com/sirupsen/logrus"

	"github.com/dynalimit/dynalimit/internal/config"
	"github.com/dynalimit/dynalimit/pkg/descriptors"
)

// logLoadFailure logs a start stopped by descriptor files that do not load:
// each problem as an entry of its own (its file, line and key as fields, the
// problem as the message), then the command that checks the directory. It
// reports false, logging nothing, when err is not such a failure.
func logLoadFailure(log *logrus.Logger, s config.Settings, err error) bool {
	var de *descriptors.Error
	if s.ConfigType != config.ConfigTypeFile || !errors.As(err, &de) || len(de.Problems) == 0 {
		return false
	}
	entry := log.WithField("component", "config")
	for _, p := range de.Problems {
		entry.WithFields(logrus.Fields{"file": p.File, "line": p.Line, "key": p.Key}).Error(p.Error())
	}
	dir := s.ConfigDir()
	fields := logrus.Fields{"dir": dir, "problems": len(de.Problems)}
	if d := de.DescriptorDir(); d != "" {
		dir = d // some files were Envoy bootstraps: point at the descriptor files
		fields["descriptor_dir"] = d
	}
	entry.WithFields(fields).Errorf("ratelimit stopped: the descriptor files do not load (%s above); check them with: ratelimit check-config -config_dir %s",
		plural(len(de.Problems), "problem"), dir)
	return true
}
