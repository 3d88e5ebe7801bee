/// <reference types="vitest/config" />
import { defineConfig } from 'vite';
import react from '@vitejs/plugin-react';

// The gateway that `npm run dev` proxies /v1 to (the REST/JSON gateway of `trainyard`).
const gateway = process.env.TRAINYARD_GATEWAY ?? 'http://127.0.0.1:8090';

export default defineConfig({
  plugins: [react()],
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    // No inline scripts in index.html: the gateway's CSP is `script-src 'self'`.
    modulePreload: { polyfill: false },
    sourcemap: false,
    chunkSizeWarningLimit: 700,
  },
  server: {
    port: 5173,
    proxy: {
      '/v1': { target: gateway, changeOrigin: true },
    },
  },
  preview: {
    proxy: {
      '/v1': { target: gateway, changeOrigin: true },
    },
  },
  test: {
    include: ['src/**/*.test.ts'],
    environment: 'node',
  },
});
