"""Real parts for the tests: an etcd server, free loopback ports, process runners."""
