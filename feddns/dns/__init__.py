"""The Federated-DNS server, in stages kept apart (docs/architecture.md).

``wire`` parses queries; ``index`` holds the records by name, updated when a
record changes; ``policy`` orders shards for the asking cluster; ``answer``
packs replies; ``responder`` is the query path (match the zone, look the name
up, switch on node kind and qtype, pack); ``cache`` decides what is kept and
when it goes, over ``replystore``; ``transport`` carries UDP and TCP.
"""
