package main

import (
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The page's tests drive Debian's headless Chromium by its command line
// (--dump-dom, --screenshot): the DOM after the browser parsed the page,
// and a picture of it at a given size. The page runs no script, so
// nothing needs the DevTools protocol.

// chromium is the path of Chromium; a test that needs it fails, never
// skips, when it is missing.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("headless Chromium is missing: install Debian's chromium package (apt-get install chromium; .ci/run installs it when missing)")
	return ""
}

// browse runs headless Chromium on url with args (--dump-dom, or
// --screenshot=FILE) and returns what it printed on stdout.
func browse(t *testing.T, url string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	all := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=2000"}, args...)
	cmd := exec.CommandContext(ctx, chromium(t), append(all, url)...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("chromium %v %s: %v\n%s", args, url, err, stderr)
	}
	return string(out)
}

// dom is the page at url as Chromium parsed it.
func dom(t *testing.T, url string) string {
	t.Helper()
	return browse(t, url, "--dump-dom")
}

// screenshot saves a PNG of the page at url at width×height under dir and
// returns its path.
func screenshot(t *testing.T, url, dir, name, size string) string {
	t.Helper()
	path := filepath.Join(dir, name+".png")
	browse(t, url, "--screenshot="+path, "--window-size="+size, "--hide-scrollbars")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("screenshot %s at %s: %v", url, size, err)
	}
	return path
}

// screens are the widths the page is pictured at: a laptop's and a
// phone's.
var screens = []struct {
	name          string
	width, height int
}{{"desktop", 1280, 800}, {"phone", 390, 844}}

// screenshots pictures the page at url at each of screens into the test's
// artifact directory (kept by go test -artifacts), checks each picture
// (checkShot), and logs each path; when the test fails, it copies them to
// a directory that outlives the run and logs that.
func screenshots(t *testing.T, url string) {
	t.Helper()
	dir := t.ArtifactDir()
	var paths []string
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		keep, err := os.MkdirTemp("", "dynalimit-page-shots-")
		if err != nil {
			t.Logf("screenshots not kept: %v", err)
			return
		}
		for _, p := range paths {
			if b, err := os.ReadFile(p); err == nil {
				_ = os.WriteFile(filepath.Join(keep, filepath.Base(p)), b, 0o644)
			}
		}
		t.Logf("the test failed: its screenshots are kept in %s", keep)
	})
	for _, s := range screens {
		path := screenshot(t, url, dir, s.name, fmt.Sprintf("%d,%d", s.width, s.height))
		paths = append(paths, path)
		t.Logf("screenshot %s (%d×%d): %s", s.name, s.width, s.height, path)
		checkShot(t, path, s.width, s.height)
	}
}

// checkShot fails t unless the PNG at path is width×height and shows a
// page (shotProblem).
func checkShot(t *testing.T, path string, width, height int) {
	t.Helper()
	if err := shotProblem(path, width, height); err != nil {
		t.Errorf("screenshot %s: %v", path, err)
	}
}

// shotProblem says what is wrong with the PNG at path: not width×height,
// or blank rather than a page (a page has dark ink, its text, on at least
// 0.2% of it, in more than a handful of colours); nil when nothing is.
func shotProblem(path string, width, height int) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		return fmt.Errorf("not a PNG: %w", err)
	}
	b := img.Bounds()
	if b.Dx() != width || b.Dy() != height {
		return fmt.Errorf("%d×%d, want %d×%d", b.Dx(), b.Dy(), width, height)
	}
	colours := map[color.RGBA]bool{}
	dark := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)
			colours[c] = true
			if int(c.R)+int(c.G)+int(c.B) < 3*100 {
				dark++
			}
		}
	}
	if total := b.Dx() * b.Dy(); len(colours) < 8 || dark*1000 < 2*total {
		return fmt.Errorf("looks blank: %d colours, %d of %d pixels dark (want 8 colours or more, and 0.2%% dark)", len(colours), dark, total)
	}
	return nil
}

// TestShotProblem: the screenshots' check refuses a blank picture and one
// of another size, and takes one with text on it.
func TestShotProblem(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, w, h int, ink bool) string {
		img := image.NewRGBA(image.Rect(0, 0, w, h))
		for y := range h {
			for x := range w {
				c := color.RGBA{255, 255, 255, 255}
				if ink && y%10 < 2 && x%7 < 4 {
					c = color.RGBA{uint8(x % 16), uint8(y % 16), 20, 255} // dark text, in several colours
				}
				img.SetRGBA(x, y, c)
			}
		}
		path := filepath.Join(dir, name+".png")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := png.Encode(f, img); err != nil {
			t.Fatal(err)
		}
		return path
	}
	if err := shotProblem(write("blank", 390, 844, false), 390, 844); err == nil || !strings.Contains(err.Error(), "blank") {
		t.Errorf("a blank picture: %v, want it refused as blank", err)
	}
	if err := shotProblem(write("small", 300, 844, true), 390, 844); err == nil || !strings.Contains(err.Error(), "300×844") {
		t.Errorf("a picture 300 wide: %v, want it refused for its size", err)
	}
	if err := shotProblem(write("page", 390, 844, true), 390, 844); err != nil {
		t.Errorf("a picture with text: %v, want it taken", err)
	}
}
