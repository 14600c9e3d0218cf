"""Published runs and the ``validate`` groups: the cost model and the planner against measurements. Sits above
the planner (some groups run it free); nothing below imports it."""
