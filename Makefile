# rlm: everything from a fresh Debian 12 machine, as root.
#   make demo   the main job (today: rlm analyze over real captures; the lab arrives with issue 3)
#   make test   every test
SHELL := /bin/bash
.DEFAULT_GOAL := test

# Debian packages the build and the tests need.
APT_PACKAGES := build-essential pkg-config libpcap-dev clang llvm libbpf-dev gcc-multilib iproute2 ethtool iputils-ping iptables nginx postgresql fonts-dejavu-core

CARGO ?= cargo
export CARGO_TERM_COLOR ?= never
TESTDATA ?= $(abspath ../shared/testdata/zeek-http)

.PHONY: deps build test demo bench fuzz clean

# Install only what is missing, so a second run costs nothing and needs no network.
deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	@command -v $(CARGO) >/dev/null || { echo "cargo not found: install Rust (rustup) first" >&2; exit 1; }

build: deps
	$(CARGO) build --release --workspace --locked

test: deps
	RLM_ZEEK_TESTDATA=$(TESTDATA) $(CARGO) test --workspace --locked

demo: build
	@echo "== rlm analyze over Zeek's real HTTP captures (the lab demo of issue 3 replaces this) =="
	@for t in get 100-continue http-11-request-then-cruft 261_variant-01-chunk_2pow64_overflow; do \
		./target/release/rlm analyze --quiet $(TESTDATA)/traces/$$t.pcap --transactions /tmp/rlm-demo-$$t.jsonl | head -6; \
		echo "   transactions written to /tmp/rlm-demo-$$t.jsonl"; \
	done

bench: deps
	$(CARGO) bench -p rlm-core --bench engine

# A 10-minute fuzz run of the engine (needs the nightly toolchain and cargo-fuzz).
fuzz:
	command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	cd fuzz && $(CARGO) +nightly fuzz run engine_frames -- -max_total_time=600 -timeout=10 -rss_limit_mb=2048

clean:
	$(CARGO) clean
