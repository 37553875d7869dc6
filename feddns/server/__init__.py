"""``feddns serve``'s own modules: what runs the DNS server of ``feddns.dns`` as a command.

``command`` holds the flags, ``run`` and a worker's entry point; ``settings`` the one
settings root (:class:`~feddns.server.settings.ServeSettings`) built from the flags, where
every flag error is raised; ``workers`` the parent and the workers of ``--workers N``;
``cpus`` the default N. Nothing is imported here, so that ``feddns serve --help`` loads
only ``command`` (``feddns.cli``); the answer path (``feddns.dns``, ``feddns.store``)
never imports this package (import-linter's layers contract, pyproject.toml).
"""
