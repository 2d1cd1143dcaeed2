// Command upstream is the application behind Envoy in the walkthrough: it
// answers every request with 200 and a line naming its method and path,
// with the response headers its query asks for: ?header=Name:value
// (repeatable), as an LLM backend reports the tokens a response used
// (examples/envoy/envoy-budgets.yaml).
//
//	go run ./examples/upstream            # listens on 127.0.0.1:8090
//	go run ./examples/upstream -addr :9000
//
// The bootstraps in examples/envoy route their "app" cluster to port 8090.
package main
