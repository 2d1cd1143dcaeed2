// Package deploytest checks the repository's Dockerfile without a Docker
// engine. The package has no code outside its tests.
//
// TestDockerfile reads the Dockerfile and checks what the image promises:
// a builder pinned to go.mod's Go version, a static build of ./cmd/ratelimit
// (CGO_ENABLED=0, -trimpath, -ldflags "-s -w"), a final stage from scratch
// with CA certificates, the binary at /bin/ratelimit as the exec-form
// ENTRYPOINT (a drop-in for envoyproxy/ratelimit's image), USER 65534:65534,
// ports 8080, 8081 and 6070, an upstream target for docker-compose.yml, and
// COPY sources that exist in the repository and that .dockerignore keeps in
// the build context. It runs the same checks over copies of the Dockerfile
// broken on purpose, each of which must be refused.
//
// TestImageBinary builds what the image would hold, the way the Dockerfile
// says: the build context filtered by .dockerignore, the builder stage's
// COPY instructions into a work tree, then the stage's go commands as
// written (their flags are read from the Dockerfile, so a change there is
// what is tested), with the final stage's files copied where its COPY
// instructions put them. It checks with debug/elf that the binaries are
// static (no PT_INTERP program header, no DT_NEEDED entry), then starts the
// final stage's ENTRYPOINT on the embedded store with free ports and a
// temporary descriptor directory and waits for /healthcheck to answer 200.
// Like the other tests that build the binary it skips under -short.
package deploytest
