"""cnikit.fabric: the VPC in network namespaces.

    netlink     raw rtnetlink client (links, veths, addresses, routes, rules, neighbours)
    netns       namespaces made in-process (unshare + bind mount), setns via ctypes
    wiring      the pod data plane (upstream's layout), shared with the CNI plugin
    topology    Fabric: vpc router, nodes, ENI links following EC2, pods
    routes      the model: which links and routes one EC2 ownership snapshot asks for
    cni         executing CNI plugins as a runtime does
    cleanup     removing dead runs' leftovers (`cnikit cleanup` is cnikit.cluster's)
    names       names and fixed addresses (IMDS 169.254.169.254, EC2 gate 169.254.169.250)

Nothing is imported here: a CNI plugin imports `cnikit.fabric.wiring` once per pod.
"""
