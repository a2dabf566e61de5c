"""MetricReducer, make_metric's machinery and the built-in reducers."""

__all__: list = []
