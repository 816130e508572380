"""cnikit.scenarios"""
