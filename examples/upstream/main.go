package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"strings"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8090", "address to listen on")
	flag.Parse()
	srv := &http.Server{
		Addr:              *addr,
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for _, h := range r.URL.Query()["header"] {
				if k, v, ok := strings.Cut(h, ":"); ok {
					w.Header().Add(k, v)
				}
			}
			fmt.Fprintf(w, "%s %s\n", r.Method, r.URL.Path)
		}),
	}
	log.Printf("upstream: listening on %s", *addr)
	log.Fatal(srv.ListenAndServe())
}
