"""The Federated-DNS server, in stages kept apart (docs/architecture.md).

``wire`` parses queries; ``index`` holds the records by name, updated when a
record changes; ``policy`` orders shards for the asking cluster; ``answer``
packs replies; ``responder`` is the query path (a cache of packed answers
over the index); ``transport`` carries UDP and TCP.
"""
