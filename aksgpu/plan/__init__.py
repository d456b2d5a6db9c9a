"""The offline plan: the real Pulumi program under Pulumi's mock runtime, recorded (planner.py),
and what is made from the recording: its one review (review.py: policies, cost, deploy time), the
text and JSON reports, Kubernetes manifests, a fleet's plan and the stack references it answers,
and the pull-request summary.
"""
