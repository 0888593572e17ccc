/** The name rule shared by every fleet object, replica ids and metric labels (see schemas/common.schema.json). */
export const NAME_RE = /^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$/;

export function isValidName(s: string): boolean {
  return NAME_RE.test(s);
}
