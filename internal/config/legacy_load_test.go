package config

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReloaderStartEmpty(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "config")
	s := Defaults()
	s.ConfigDirOverride = dir
	if _, err := NewReloader(ReloaderOptions{Dir: dir, Load: s.Loader()}); err == nil {
		t.Fatal("NewReloader(missing dir) = nil error, want one without StartEmpty")
	}
	r, err := NewReloader(ReloaderOptions{Dir: dir, Load: s.Loader(), StartEmpty: true})
	if err != nil {
		t.Fatalf("NewReloader(StartEmpty) = %v", err)
	}
	if d := r.Current().Domains(); len(d) != 0 {
		t.Fatalf("Current().Domains() = %v, want none", d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	yaml := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if d := r.Current().Domains(); len(d) != 1 || d[0] != "d" {
		t.Errorf("Current().Domains() = %v after a good load, want [d]", d)
	}
}

func TestQuotaModeLoader(t *testing.T) {
	dir := t.TempDir()
	yaml := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n  - key: q\n    quota_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, quota := range []bool{false, true} {
		s := Defaults()
		s.QuotaMode = quota
		cfg, err := s.Loader()(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range cfg.Rules() {
			want := quota || r.FullKey == "d.q"
			if r.QuotaMode != want {
				t.Errorf("QUOTA_MODE=%v: rule %s QuotaMode = %v, want %v", quota, r.FullKey, r.QuotaMode, want)
			}
		}
	}
}
