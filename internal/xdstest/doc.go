// Package xdstest runs an in-process go-control-plane management server for
// tests of configuration over xDS: an aggregated (ADS) state-of-the-world
// server over a snapshot cache, which records the NACKs it receives and the
// metadata of the streams opened to it, and Push, which sets a snapshot of
// rate-limit configurations (RateLimitConfig resources) for one node.
//
// A Server is safe for concurrent use; Stop ends its goroutines and may be
// called more than once.
package xdstest
