"""sprig.kernels"""
