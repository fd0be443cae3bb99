"""The Kubernetes side of rngdctl.

``client`` is the one module that calls the ``kubernetes`` client; the others
(``jobspec``, ``cluster``, ``logs``) are plain data in, data out, and import
no Kubernetes code, so they are cheap to import and to test.
"""
