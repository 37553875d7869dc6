"""The real programs a federation runs, started on this machine for the tests, the demo
(scripts/demo.py) and the benchmarks (bench/): etcd, kube-apiserver, CoreDNS, unbound, the
feddns processes and the chain that wires them (harness/chain.py). It imports no test library
(pytest, hypothesis), so the demo runs from an install without the test extras; it is not part
of the installed package."""
