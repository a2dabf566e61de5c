"""``det-estimator ui``: a local web page over the store, to watch and compare experiments and searches.

A front end, beside the command: a small Starlette app (:mod:`det_estimator.ui._app`)
that uvicorn serves, with pages rendered on the server and Plotly's own bundled script
for the charts, so that nothing is fetched from the internet. Importing
``det_estimator`` or its command does not import this package or its web libraries;
``det-estimator ui`` does.
"""

from det_estimator.ui._access import Access, is_loopback, new_token
from det_estimator.ui._app import Settings, create_app
from det_estimator.ui._serve import TOKEN_VARIABLE, serve

__all__ = ["TOKEN_VARIABLE", "Access", "Settings", "create_app", "is_loopback", "new_token", "serve"]
