"""cnikit.plugin"""
