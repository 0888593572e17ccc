/**
 * Named secrets in the controller's secrets dir, read when needed (so a secret put in place later is
 * picked up without a restart): models' download tokens.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { LlmgwError } from '../errors/catalogue.js';
import { TOKEN_RE } from '../nodes/shell-driver.js';
import { validIdentityName } from '../nodes/ssh.js';

/** Reads bearer tokens by secret name from `dir`: SECRET_NOT_FOUND when missing, SECRET_INVALID when not one token. */
export function tokenSecrets(dir: string): (name: string) => Promise<string> {
  return async (name) => {
    if (!validIdentityName(name)) throw new LlmgwError('SECRET_NOT_FOUND', `secret name ${JSON.stringify(name)} is not a file name in the secrets dir`, { secret: name });
    let text: string;
    try {
      text = await readFile(join(dir, name), 'utf8');
    } catch (e) {
      throw new LlmgwError('SECRET_NOT_FOUND', `secret '${name}' not found in the secrets dir ${dir}`, { secret: name, dir }, { cause: e });
    }
    const value = text.trim();
    if (!TOKEN_RE.test(value)) throw new LlmgwError('SECRET_INVALID', `secret '${name}' in ${dir} is not a bearer token (one line of visible ASCII, no spaces)`, { secret: name, dir });
    return value;
  };
}
