"""Records of federation `pol` for the answer-policy, headless and MCS tests.

Clusters: a and b and e share zone z1; c shares region r1 only; d is far. The pods of a
and c are routable from other clusters (`podNetwork: routable`); those of b, d, e are not.
Each service comes healthy and as `<name>-down` with a shard not ready. Addresses:
service number S, cluster number N (a=1 ... e=5): clusterIP 10.S.0.N, externalIP S.S.0.N.
"""

LOC = """
/pol/prod/loc/a: {clusterIP: 10.1.0.1, externalIP: 1.1.0.1, ports: [{name: http, port: 80}]}
/pol/prod/loc/b: {clusterIP: 10.1.0.2, externalIP: 1.1.0.2, ports: [{name: http, port: 80}]}
/pol/prod/loc/c: {clusterIP: 10.1.0.3, externalIP: 1.1.0.3, ports: [{name: http, port: 80}]}
/pol/prod/loc/d: {clusterIP: 10.1.0.4, externalIP: 1.1.0.4, ports: [{name: http, port: 80}]}
/pol/prod/loc/e: {clusterIP: 10.1.0.5, externalIP: 1.1.0.5, ports: [{name: http, port: 80}]}
/pol/prod/loc-down/a: {clusterIP: 10.1.1.1, externalIP: 1.1.1.1}
/pol/prod/loc-down/b: {clusterIP: 10.1.1.2, externalIP: 1.1.1.2, ready: 0}
/pol/prod/loc-down/c: {clusterIP: 10.1.1.3, externalIP: 1.1.1.3}
"""

FAILOVER = """
/pol/prod/fo/a: {clusterIP: 10.2.0.1, externalIP: 2.2.0.1, policy: failover, failoverOrder: [c, a], \
ports: [{name: http, port: 80}]}
/pol/prod/fo/b: {clusterIP: 10.2.0.2, externalIP: 2.2.0.2, policy: failover, failoverOrder: [c, a], \
ports: [{name: http, port: 80}]}
/pol/prod/fo/c: {clusterIP: 10.2.0.3, externalIP: 2.2.0.3, policy: failover, failoverOrder: [c, a], \
ports: [{name: http, port: 80}], ready: 2}
/pol/prod/fo/d: {clusterIP: 10.2.0.4, externalIP: 2.2.0.4, policy: failover, failoverOrder: [c, a], \
ports: [{name: http, port: 80}]}
/pol/prod/fo-down/a: {clusterIP: 10.2.1.1, externalIP: 2.2.1.1, policy: failover, failoverOrder: [c, a]}
/pol/prod/fo-down/b: {clusterIP: 10.2.1.2, externalIP: 2.2.1.2, policy: failover, failoverOrder: [c, a]}
/pol/prod/fo-down/c: {clusterIP: 10.2.1.3, externalIP: 2.2.1.3, policy: failover, failoverOrder: [c, a], ready: 0}
/pol/prod/fo-down/d: {clusterIP: 10.2.1.4, externalIP: 2.2.1.4, policy: failover, failoverOrder: [c, a]}
"""

WEIGHTED = """
/pol/prod/wt/a: {clusterIP: 10.3.0.1, externalIP: 3.3.0.1, policy: weighted, weight: 3, ports: [{name: http, port: 80}]}
/pol/prod/wt/b: {clusterIP: 10.3.0.2, externalIP: 3.3.0.2, policy: weighted, weight: 1, ports: [{name: http, port: 80}]}
/pol/prod/wt/c: {clusterIP: 10.3.0.3, externalIP: 3.3.0.3, policy: weighted, weight: 0, ports: [{name: http, port: 80}]}
/pol/prod/wt/d: {clusterIP: 10.3.0.4, externalIP: 3.3.0.4, policy: weighted, ports: [{name: http, port: 80}]}
/pol/prod/wt-down/a: {clusterIP: 10.3.1.1, externalIP: 3.3.1.1, policy: weighted, weight: 3, ready: 0}
/pol/prod/wt-down/b: {clusterIP: 10.3.1.2, externalIP: 3.3.1.2, policy: weighted, weight: 1}
/pol/prod/wt-down/d: {clusterIP: 10.3.1.4, externalIP: 3.3.1.4, policy: weighted, weight: 2}
/pol/prod/wt6/a: {clusterIPs: [10.3.2.1, "fd00::3:1"], externalIPs: [3.3.2.1, "2001:db8::3:1"], policy: weighted, \
weight: 2}
/pol/prod/wt6/b: {clusterIPs: [10.3.2.2, "fd00::3:2"], externalIPs: [3.3.2.2, "2001:db8::3:2"], policy: weighted, \
weight: 1}
"""

LOCALITY_WEIGHTED = """
/pol/prod/lw/a: {clusterIP: 10.4.0.1, externalIP: 4.4.0.1, policy: locality-weighted, weight: 1, \
ports: [{name: http, port: 80}]}
/pol/prod/lw/b: {clusterIP: 10.4.0.2, externalIP: 4.4.0.2, policy: locality-weighted, weight: 3, \
ports: [{name: http, port: 80}]}
/pol/prod/lw/c: {clusterIP: 10.4.0.3, externalIP: 4.4.0.3, policy: locality-weighted, weight: 1, \
ports: [{name: http, port: 80}]}
/pol/prod/lw/d: {clusterIP: 10.4.0.4, externalIP: 4.4.0.4, policy: locality-weighted, weight: 1, \
ports: [{name: http, port: 80}]}
/pol/prod/lw/e: {clusterIP: 10.4.0.5, externalIP: 4.4.0.5, policy: locality-weighted, weight: 2, \
ports: [{name: http, port: 80}]}
/pol/prod/lw-down/a: {clusterIP: 10.4.1.1, externalIP: 4.4.1.1, policy: locality-weighted, weight: 1}
/pol/prod/lw-down/b: {clusterIP: 10.4.1.2, externalIP: 4.4.1.2, policy: locality-weighted, weight: 3}
/pol/prod/lw-down/e: {clusterIP: 10.4.1.5, externalIP: 4.4.1.5, policy: locality-weighted, weight: 2, ready: 0}
"""

FALLBACK = """
/pol/prod/mixed/a: {clusterIP: 10.5.0.1, externalIP: 5.5.0.1, policy: failover, failoverOrder: [b]}
/pol/prod/mixed/b: {clusterIP: 10.5.0.2, externalIP: 5.5.0.2, policy: weighted, weight: 5}
/pol/prod/badpolicy/a: {clusterIP: 10.6.0.1, externalIP: 6.6.0.1, policy: nonsense}
/pol/prod/badpolicy/d: {clusterIP: 10.6.0.4, externalIP: 6.6.0.4, policy: nonsense}
/pol/prod/badweight/a: {clusterIP: 10.7.0.1, externalIP: 7.7.0.1, policy: weighted, weight: -1}
/pol/prod/badweight/b: {clusterIP: 10.7.0.2, externalIP: 7.7.0.2, policy: weighted, weight: 2}
"""

HEADLESS = """
/pol/prod/hl/a: {endpoints: [{ip: 10.60.0.1, hostname: web-0}, {ip: 10.60.0.2, hostname: web-1}], ready: 2, \
ports: [{name: http, port: 8080}]}
/pol/prod/hl/b: {endpoints: [{ip: 10.61.0.1, hostname: web-0}], ready: 1, ports: [{name: http, port: 8080}]}
/pol/prod/hl/c: {endpoints: [{ip: 10.62.0.1}, {ip: "fd00::62:1"}], ready: 1, ports: [{name: http, port: 8080}]}
/pol/prod/hl/d: {endpoints: [{ip: 10.63.0.1, hostname: web-0}], ready: 1, ports: [{name: http, port: 8080}]}
/pol/prod/hl-down/a: {endpoints: [], ready: 0, ports: [{name: http, port: 8080}]}
/pol/prod/hl-down/b: {endpoints: [{ip: 10.61.1.1, hostname: web-0}], ready: 1, ports: [{name: http, port: 8080}]}
/pol/prod/hl-down/c: {endpoints: [{ip: 10.62.1.1, hostname: web-0}], ready: 1, ports: [{name: http, port: 8080}]}
/pol/prod/hlw/a: {endpoints: [{ip: 10.70.0.1}, {ip: 10.70.0.2}], ready: 2, policy: weighted, weight: 1}
/pol/prod/hlw/c: {endpoints: [{ip: 10.72.0.1}], ready: 1, policy: weighted, weight: 3}
/pol/prod/hlfo/a: {endpoints: [{ip: 10.80.0.1}], ready: 1, policy: failover, failoverOrder: [c]}
/pol/prod/hlfo/c: {endpoints: [{ip: 10.82.0.1}], ready: 1, policy: failover, failoverOrder: [c]}
"""

CLUSTERS = """
/pol/_clusters/a: {zone: z1, region: r1, podNetwork: routable}
/pol/_clusters/b: {zone: z1, region: r1, podNetwork: isolated}
/pol/_clusters/c: {zone: z2, region: r1, podNetwork: routable}
/pol/_clusters/d: {zone: z3, region: r2}
/pol/_clusters/e: {zone: z1, region: r1}
"""

BIG_ENDPOINTS = 1000


def big_headless() -> str:
    """Headless shards in a and c (both routable) with the most endpoints a record may hold (1,000)."""
    out = []
    for cluster, net in (("a", 100), ("c", 102)):
        endpoints = ", ".join(f"{{ip: 10.{net}.{i // 250}.{i % 250 + 1}, hostname: web-{i}}}"
                              for i in range(BIG_ENDPOINTS))
        out.append(f"/pol/prod/hlbig/{cluster}: {{endpoints: [{endpoints}], ready: {BIG_ENDPOINTS}, "
                   "ports: [{name: http, port: 8080}]}\n")
    return "".join(out)


RECORDS = CLUSTERS + LOC + FAILOVER + WEIGHTED + LOCALITY_WEIGHTED + FALLBACK + HEADLESS + big_headless()
