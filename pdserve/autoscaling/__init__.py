"""SLO-driven autoscaling of each pool on Ray Serve's custom autoscaling policy API.

Pure: `policy` (how many replicas a pool wants, from its replicas' own signals). Adapter:
`serve_policy` (the `policy_function`s Ray Serve's controller calls with an
`AutoscalingContext`; they read what each replica reports from `record_autoscaling_stats`).
"""
