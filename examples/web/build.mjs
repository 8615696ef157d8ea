// Bundles the example into dist/ with esbuild: dist/index.html and dist/app.js, from the npm
// packages pinned in package-lock.json (nothing is loaded from elsewhere at run time).
//
//   node build.mjs [--watch]

import { copyFileSync, mkdirSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

import * as esbuild from 'esbuild'

const here = dirname(fileURLToPath(import.meta.url))
const dist = join(here, 'dist')

export async function build() {
  mkdirSync(dist, { recursive: true })
  copyFileSync(join(here, 'src', 'index.html'), join(dist, 'index.html'))
  await esbuild.build({
    entryPoints: [join(here, 'src', 'main.jsx')],
    bundle: true,
    outfile: join(dist, 'app.js'),
    format: 'esm',
    target: 'es2022',
    jsx: 'automatic',
    minify: true,
    sourcemap: true,
    define: { 'process.env.NODE_ENV': '"production"' },
    logLevel: 'warning',
  })
  return dist
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  await build()
  console.log(`built ${dist}`)
}
