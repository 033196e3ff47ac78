"""keyshift: load balancing and elasticity for keyed, stateful stream jobs.

This package is the pure core (no Spark, Airflow or torch): key groups, plans, balance
metrics, policies, the weighted split, the engine planner, the simulator, the operators of
the shipped applications, schemas and configuration.
"""

__version__ = "0.1.0"
