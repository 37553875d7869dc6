.PHONY: demo test peers e2e

# One federation end to end on this machine: prints dig lines through each cluster's resolver.
demo:
	bash scripts/demo.sh

test:
	bash scripts/test.sh

# The e2e tier alone: two real clusters (kubelet, containerd, kube-proxy, CoreDNS each) running the
# feddns image and both charts (tests/e2e/); installs what it needs as the test command does, prints
# the join, leave and failover times it measured (`e2e figure:` lines).
e2e:
	bash scripts/test.sh tests/e2e

# The real peers of the tests, the demo and the benchmarks (CoreDNS, kube-apiserver, kubectl, helm),
# built from the Go module proxy into ~/.cache/feddns-peers; reused when there.
peers:
	bash scripts/peers.sh
