"""FederatedDNSController."""
