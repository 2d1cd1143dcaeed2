package charttest

import (
	"sync"

	"github.com/dynalimit/dynalimit/internal/testutil"
)

// HelmVersion is the Helm release the chart is checked with.
const HelmVersion = "v3.22.0"

// HelmModule is the package built as the helm binary.
const HelmModule = "helm.sh/helm/v3/cmd/helm"

var (
	helmOnce sync.Once
	helmBin  string
	helmErr  error
)

// Helm returns the helm binary of HelmVersion under root/.cache/helm/,
// building it with go install (about two minutes) when it is missing.
// Concurrent callers, in this process or others, build it once.
func Helm(root string) (string, error) {
	helmOnce.Do(func() { helmBin, helmErr = buildHelm(root) })
	return helmBin, helmErr
}

func buildHelm(root string) (string, error) {
	return testutil.InstallTool(root, HelmModule, HelmVersion)
}
