"""cnikit.report"""
