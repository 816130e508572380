"""cnikit.fabric"""
