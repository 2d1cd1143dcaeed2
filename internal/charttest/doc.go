// Package charttest checks the Helm chart in charts/dynalimit: helm lint and
// helm template over the default values and over testdata/full-values.yaml
// (every option on), every rendered object strictly decoded into the
// Kubernetes API types, the rendered environment read back as the binary's
// settings, the values schema refusing a misspelled value, and the Grafana
// dashboard naming only metrics the binary exports.
//
// Helm is built once at the pinned HelmVersion into .cache/helm/<version>/
// and reused; lint and template need no cluster and no network once it is
// built. The tests skip under -short, as the other tests that build binaries
// do.
package charttest
