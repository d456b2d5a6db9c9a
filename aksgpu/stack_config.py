"""The keys of a stack's config that aksgpu writes and reads, in one place.

A stack file holds its spec under one of three keys (a cluster's, a fleet's shared stack's or a
fleet's upgrades stack's) and, when `aksgpu render` wrote it, the digest of that spec beside it. The
keys live in Pulumi's config namespace `aksgpu`: the program reads them by their name in it
(`pulumi.Config(NAMESPACE).get_object(CLUSTER)`), everything else by the full key. The stack file
templates get them passed in. Imports nothing, so every layer may import it.
"""

NAMESPACE = "aksgpu"
CLUSTER = "cluster"
FLEET = "fleet"
FLEET_UPGRADES = "fleetUpgrades"
RENDER_DIGEST = "renderDigest"

CLUSTER_KEY = f"{NAMESPACE}:{CLUSTER}"  # a cluster's spec (ClusterSpec)
FLEET_KEY = f"{NAMESPACE}:{FLEET}"  # a fleet's shared stack (FleetSpec)
FLEET_UPGRADES_KEY = f"{NAMESPACE}:{FLEET_UPGRADES}"  # a fleet's upgrades stack (FleetUpgradesSpec)
SPEC_KEYS = (CLUSTER_KEY, FLEET_KEY, FLEET_UPGRADES_KEY)
DIGEST_KEY = f"{NAMESPACE}:{RENDER_DIGEST}"  # the digest of the spec as rendered (environments/render.py)
