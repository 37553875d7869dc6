"""Test-only parts: the fake API server (fakekube.py, for faults a real kube-apiserver cannot
show on demand), BIND, a stalling proxy. The real programs live in harness/."""
