"""Videos at URLs (``s3://``, ``gs://``, ``az://``, ``http(s)://``, ``file://``): credentials, the network, listing.

See :doc:`/video/remote`.
"""

from ._base.keys import is_url
from ._bytes.listing import RemotePath
from ._bytes.objects import Network, ObjectChanged, close, configure, forget_settings

__all__ = ["Network", "ObjectChanged", "RemotePath", "close", "configure", "forget_settings", "is_url"]
