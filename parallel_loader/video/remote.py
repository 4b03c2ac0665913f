"""Videos at URLs (``s3://``, ``gs://``, ``az://``, ``http(s)://``, ``file://``): credentials, the network, listing.

See :doc:`/video/remote`.
"""

from ._bytes.objects import Network, ObjectChanged, RemotePath, close, configure, forget_settings, is_url

__all__ = ["Network", "ObjectChanged", "RemotePath", "close", "configure", "forget_settings", "is_url"]
