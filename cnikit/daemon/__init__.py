"""cnikit.daemon"""
