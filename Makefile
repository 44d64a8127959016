# make install [PREFIX=/usr/local] [DESTDIR=...]: builds the release tree (when a source changed
# since the last build) and installs goset under PREFIX; make uninstall removes it; make deb
# builds the Debian package target/debian/goset_VERSION_ARCH.deb of the same files under /usr.
# What goes where: docs/install.md. The work is goset-dist's (dist/); this file is the usual
# front door.

PREFIX ?= /usr/local
DESTDIR ?=
CARGO ?= cargo
TARGET_DIR ?= $(or $(CARGO_TARGET_DIR),target)

RELEASE := $(TARGET_DIR)/release
DIST := $(RELEASE)/goset-dist
PACKAGES := -p goset -p goset-preload -p goset-bench -p goset-dist
# A stamp rather than a program's time: cargo leaves untouched a program none of whose inputs
# changed, and `sudo make install` after `make` must not run cargo as root.
STAMP := $(RELEASE)/.make-install-stamp
SOURCES := Cargo.toml Cargo.lock slurm/goset_spank.c $(shell find plan preload launcher bench dist \
	\( -path '*/src/*' -o -name Cargo.toml -o -name build.rs \) -type f)
# The Slurm plugin (docs/slurm.md), built only where libslurm-dev's spank.h is; goset-dist
# installs it, with its plugstack.conf.d snippet, when it was built.
CC ?= cc
SPANK_H := $(wildcard /usr/include/slurm/spank.h)
SPANK_PLUGIN := $(RELEASE)/goset_spank.so
DEB_DIR ?= $(TARGET_DIR)/debian
DIST_ARGS := --prefix "$(PREFIX)" $(if $(DESTDIR),--destdir "$(DESTDIR)")

.PHONY: all install uninstall deb

all: $(STAMP)

# The stamp takes the time the build started: a source saved while cargo runs is newer.
$(STAMP): $(SOURCES)
	@mkdir -p $(RELEASE)
	touch $@.new
	$(CARGO) build --release $(PACKAGES)
	$(if $(SPANK_H),$(CC) -O2 -Wall -shared -fPIC -o $(SPANK_PLUGIN) slurm/goset_spank.c,rm -f $(SPANK_PLUGIN))
	mv $@.new $@

install: $(STAMP)
	$(DIST) install $(DIST_ARGS)

uninstall: $(STAMP)
	$(DIST) uninstall $(DIST_ARGS)

deb: $(STAMP)
	$(DIST) deb --out "$(DEB_DIR)"
