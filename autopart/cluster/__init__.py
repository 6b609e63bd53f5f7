"""Hosts, the level above devices: a cluster of machines on Ray (an optional extra).

:mod:`~autopart.cluster.session` starts or joins the cluster and names its hosts;
:mod:`~autopart.cluster.hosts` describes each host's devices, codegens and fingerprint,
found on the host itself; :mod:`~autopart.cluster.links` times transfers between hosts
and fits the network model (:mod:`autopart.costmodel.network`). Nothing here imports Ray
until a cluster is asked for.
"""
