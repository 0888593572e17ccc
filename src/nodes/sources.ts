/**
 * Model sources: https://…, http://… (tests, internal mirrors), hf://org/repo/path.gguf[@revision]
 * (resolved to Hugging Face's https "resolve" URL) and file:///abs/path (a file already on the node).
 */
import { LlmgwError } from '../errors/catalogue.js';

export type ModelSource =
  | { readonly kind: 'url'; readonly url: string }
  | { readonly kind: 'file'; readonly path: string };

export const HF_BASE_URL = 'https://huggingface.co';

/** Parse a normalized model source. Throws SPEC_INVALID_VALUE on anything else (the spec validates sources first). */
export function resolveModelSource(source: string, hfBase: string = HF_BASE_URL): ModelSource {
  if (source.startsWith('https://') || source.startsWith('http://')) {
    const u = new URL(source); // throws on a malformed URL
    return { kind: 'url', url: u.toString() };
  }
  if (source.startsWith('hf://')) return { kind: 'url', url: hfToHttps(source, hfBase) };
  if (source.startsWith('file://')) {
    const u = new URL(source);
    if (u.host !== '' && u.host !== 'localhost') throw new LlmgwError('SPEC_INVALID_VALUE', `file:// source must be on the node (no host): ${source}`, { source });
    const path = decodeURIComponent(u.pathname);
    if (!path.startsWith('/')) throw new LlmgwError('SPEC_INVALID_VALUE', `file:// source must be an absolute path: ${source}`, { source });
    return { kind: 'file', path };
  }
  throw new LlmgwError('SPEC_INVALID_VALUE', `unsupported model source (expected https://, hf:// or file://): ${source}`, { source });
}

/** hf://org/repo/dir/file.gguf[@rev] → https://huggingface.co/org/repo/resolve/<rev|main>/dir/file.gguf */
export function hfToHttps(source: string, hfBase: string = HF_BASE_URL): string {
  let rest = source.slice('hf://'.length);
  let revision = 'main';
  const at = rest.lastIndexOf('@');
  if (at >= 0) {
    revision = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (revision === '') throw new LlmgwError('SPEC_INVALID_VALUE', `hf:// source has an empty revision: ${source}`, { source });
  }
  const parts = rest.split('/');
  if (parts.length < 3 || parts.some((p) => p === '' || p === '.' || p === '..')) {
    throw new LlmgwError('SPEC_INVALID_VALUE', `hf:// source must be hf://org/repo/path/to/file.gguf[@revision]: ${source}`, { source });
  }
  const [org, repo, ...file] = parts as [string, string, ...string[]];
  const enc = (s: string) => encodeURIComponent(s);
  return `${hfBase.replace(/\/+$/, '')}/${enc(org)}/${enc(repo)}/resolve/${enc(revision)}/${file.map(enc).join('/')}`;
}
