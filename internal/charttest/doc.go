// Package charttest checks the Helm chart in charts/dynalimit: helm lint and
// helm template over the default values, over testdata/full-values.yaml
// (every option on) and over testdata/lease-key-values.yaml, every rendered
// object strictly decoded into the Kubernetes API types, the rendered
// environment read back as the binary's settings, the lease keys' Secret
// mounted as the key file the binary reads and loading as its keyring, a
// generated key kept across upgrades (Helm's lookup, answered by a fake API
// server), the values schema and the templates refusing wrong values, and
// the Grafana dashboard naming only metrics the binary exports.
//
// On the Redis store (testdata/redis-values.yaml, redis-existing-values.yaml
// and --set values) the rendered environment is envoyproxy/ratelimit's
// REDIS_* settings under their names, every password comes from a Secret
// through secretKeyRef and never appears in the Deployment, the TLS files
// REDIS_TLS_* name are mounted from the Secret holding them, and values that
// would be refused or would leak a password stop helm template.
//
// Helm is built once at the pinned HelmVersion into .cache/helm/<version>/
// and reused; lint and template need no cluster and no network once it is
// built. The tests skip under -short, as the other tests that build binaries
// do.
package charttest
