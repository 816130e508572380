"""cnikit.check"""
