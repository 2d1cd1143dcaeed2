package server

import (
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// PrometheusAddr returns the bound address of the USE_PROMETHEUS listener,
// nil when there is none.
func (s *Server) PrometheusAddr() net.Addr {
	if s.promLis == nil {
		return nil
	}
	return s.promLis.Addr()
}

func (s *Server) promMux() *http.ServeMux {
	path := s.o.PrometheusPath
	if path == "" {
		path = "/metrics"
	}
	mux := http.NewServeMux()
	if s.o.Gatherer != nil {
		mux.Handle(path, promhttp.HandlerFor(s.o.Gatherer, promhttp.HandlerOpts{}))
	}
	return mux
}
