.PHONY: demo test peers

# One federation end to end on this machine: prints dig lines through each cluster's resolver.
demo:
	bash scripts/demo.sh

test:
	bash scripts/test.sh

# The real peers of the tests, the demo and the benchmarks (CoreDNS, kube-apiserver, kubectl, helm),
# built from the Go module proxy into ~/.cache/feddns-peers; reused when there.
peers:
	bash scripts/peers.sh
