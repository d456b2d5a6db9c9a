"""The offline plan: the real Pulumi program under Pulumi's mock runtime, recorded, and what is made
from the recording: the text and JSON reports, Kubernetes manifests, and the pull-request summary."""
