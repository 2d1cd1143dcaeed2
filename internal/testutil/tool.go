package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"syscall"
)

// InstallTool returns the binary of Go package pkg at version under
// root/.cache/{name}/{version}/ (name: pkg's last element), building it
// with go install when it is missing (the Go module proxy is needed the
// first time). Concurrent callers, in this process or others, build it
// once: a file lock beside the version directories orders them.
func InstallTool(root, pkg, version string) (string, error) {
	name := path.Base(pkg)
	dir := filepath.Join(root, ".cache", name, version)
	bin := filepath.Join(dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(filepath.Dir(dir), ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("testutil: lock %s: %w", dir, err)
	}
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin, nil
	}
	cmd := exec.Command("go", "install", pkg+"@"+version)
	cmd.Env = append(os.Environ(), "GOBIN="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("testutil: go install %s@%s (needs the Go module proxy the first time): %w\n%s", pkg, version, err, out)
	}
	return bin, nil
}
