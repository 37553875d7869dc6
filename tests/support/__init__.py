"""Test-only parts: the fake API server (fakekube.py, for faults a real kube-apiserver cannot
show on demand), one test's view of a session's real kube-apiserver (membercluster.py), BIND, a
stalling proxy. The real programs live in harness/."""
