"""sprig.runtime"""
