package pyvenv

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// stampName is the file in the virtualenv holding the sha256 of the
// requirements file it was installed from.
const stampName = ".dynalimit-requirements"

// Install makes venv (an absolute path) hold exactly what reqFile pins,
// with hashes: it creates the virtualenv and installs the requirements
// unless venv's stamp matches reqFile's sha256. It returns venv's bin
// directory.
func Install(venv, reqFile string) (string, error) {
	req, err := os.ReadFile(reqFile)
	if err != nil {
		return "", fmt.Errorf("read the pins: %w", err)
	}
	sum := sha256.Sum256(req)
	want := hex.EncodeToString(sum[:])
	if err := os.MkdirAll(filepath.Dir(venv), 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(filepath.Dir(venv), ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", venv, err)
	}
	bin := filepath.Join(venv, "bin")
	stamp := filepath.Join(venv, stampName)
	if got, err := os.ReadFile(stamp); err == nil && strings.TrimSpace(string(got)) == want {
		return bin, nil
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		return "", fmt.Errorf("python3 is not on PATH (apt-get install python3 python3-venv): %w", err)
	}
	if out, err := exec.Command(py, "-m", "venv", venv).CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s -m venv %s (apt-get install python3-venv): %w\n%s", py, venv, err, out)
	}
	pip := exec.Command(filepath.Join(bin, "pip"), "install", "--quiet", "--disable-pip-version-check",
		"--require-hashes", "-r", reqFile)
	if out, err := pip.CombinedOutput(); err != nil {
		return "", fmt.Errorf("pip install --require-hashes -r %s: %w\n%s", reqFile, err, out)
	}
	if err := os.WriteFile(stamp, []byte(want+"\n"), 0o644); err != nil {
		return "", err
	}
	return bin, nil
}
