"""The least a Python admission webhook on aiohttp does: parse the AdmissionReview, answer "allowed".

The floor bench/links_latency.py measures `feddns links` against: the same TLS
(TLS 1.2+, the same certificate), the same aiohttp server, the same JSON
library, and nothing else. Usage: python bench/floor_webhook.py CERT KEY
"""

import asyncio
import json
import ssl
import sys

from aiohttp import web


async def mutate(request: web.Request) -> web.Response:
    review = json.loads(await request.read())
    return web.json_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                              "response": {"uid": review["request"]["uid"], "allowed": True}})


async def main(cert: str, key: str) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    app = web.Application(client_max_size=6 * 1024 * 1024)
    app.router.add_post("/mutate", mutate)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    print(f"floor webhook on https://127.0.0.1:{runner.addresses[0][1]}", file=sys.stderr, flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
